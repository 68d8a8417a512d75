--- Private file helpers shared by the rl modules (not part of the public API).
--- Both return nil, err (the io.open message, which names the path) on failure.
local M = {}

function M.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, text)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  local ok, werr = f:write(text)
  f:close()
  if not ok then return nil, path .. ": " .. tostring(werr) end
  return true
end

--- Removes a file or directory tree (rm -rf, the path quoted). → true, or nil and why.
function M.remove_tree(path)
  local q = require("rl.process").quote(path)
  local r = os.execute("rm -rf -- " .. q)
  if r == 0 or r == true then return true end
  return nil, "rm -rf " .. q .. " failed"
end

--- Compiles Lua source `text` (named `path` in messages) with environment `env` (nil:
--- the globals); LuaJIT bytecode is refused with a message saying so, since LuaJIT
--- does not verify it and a damaged chunk crashes the process. Returns the function,
--- or nil, err.
function M.load_source(text, path, env)
  if text:sub(1, 1) == "\27" then
    return nil, path .. ": is LuaJIT bytecode; give the Lua source text"
  end
  return load(text, "@" .. path, "t", env)
end

--- The same for a file.
function M.load_source_file(path, env)
  local text, err = M.read_file(path)
  if not text then return nil, err end
  return M.load_source(text, path, env)
end

return M
