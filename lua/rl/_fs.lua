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

return M
