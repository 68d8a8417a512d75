// Precompiled header for every file that needs LibTorch (CMake: rlhost_torch_rt).
#pragma once
#include <torch/torch.h>
