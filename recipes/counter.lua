-- counter: a tiny long-running recipe to poke at with `rlhost attach`.
--
--   rlhost recipes/counter.lua [--interval SECONDS]
--   rlhost attach -e 'return counter'     -- read its state while it runs
--   rlhost attach -e 'step = 1000'        -- change it
--   rlhost attach -e 'stop = true'        -- let it finish (exit status 0)
--
-- State lives in globals on purpose: attached chunks read and write globals,
-- so `counter`, `step` and `stop` are the knobs a live session can turn.
local opt = rl.args {
  description = "Counts forever (until `stop = true`), sleeping between steps; a target for rlhost attach.",
  { name = "interval", type = "number", default = 0.05, help = "seconds between steps" },
}
local interval = opt.interval

counter = 0
step = 1
stop = false

rl.log.info("counter: counting every %.3f s; `rlhost attach` to change `step` or set `stop = true`", interval)

while not stop do
  counter = counter + step
  rl.sleep(interval)
end

print(("counter: stopped at %d (step %d)"):format(counter, step))
