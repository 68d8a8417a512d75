--- rl.torch: the LibTorch module (librlhost_torch.so), loaded on first use.
return require "rlhost_torch"
