-- Prints the default model's directory (built and cached on first use).
print(require("rl").mathgen.default_model())
