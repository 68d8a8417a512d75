--- Lazy submodules: `lazy(M, {name = "module.path"})` makes M.name require the
--- module on first access (and keep it), so unused parts never load.
return function(M, map)
  return setmetatable(M, {
    __index = function(t, k)
      local name = map[k]
      if not name then return nil end
      local m = require(name)
      rawset(t, k, m)
      return m
    end,
  })
end
