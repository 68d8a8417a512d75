-- Private: the one shell-quoting helper of the rl modules (commands run through
-- os.execute / io.popen, and command lines shown in logs).
local M = {}

--- `s` as one shell word: unchanged when it holds only characters no shell
--- treats specially, else in single quotes (a quote inside becomes '\'').
function M.quote(s)
  s = tostring(s)
  if s ~= "" and s:match("^[%w%./_=:,+@%%-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- Removes a file or directory tree (rm -rf, the path quoted). → true, or nil and why.
function M.remove_tree(path)
  local r = os.execute("rm -rf -- " .. M.quote(path))
  if r == 0 or r == true then return true end
  return nil, "rm -rf " .. M.quote(path) .. " failed"
end

return M
