# RLHOST_CUDA=ON|OFF|AUTO. AUTO turns CUDA on when the CUDA toolkit (nvcc) is
# found and the LibTorch we use was built with CUDA. With it on, rlhost::torch
# also links libtorch_cuda/libc10_cuda, NCCL is linked, and RLHOST_WITH_CUDA is
# defined for the files that have CUDA paths (and only for them).
set(RLHOST_CUDA "AUTO" CACHE STRING "Build the CUDA/NCCL paths: ON, OFF or AUTO")
set_property(CACHE RLHOST_CUDA PROPERTY STRINGS ON OFF AUTO)

set(RLHOST_WITH_CUDA OFF)
if(NOT RLHOST_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND RLHOST_TORCH_HAS_CUDA)
    set(RLHOST_WITH_CUDA ON)
  elseif(RLHOST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "rlhost: -DRLHOST_CUDA=ON but CUDA toolkit found=${CUDAToolkit_FOUND}, "
      "LibTorch has CUDA libraries=${RLHOST_TORCH_HAS_CUDA}. "
      "Hint: install the CUDA toolkit and a CUDA build of torch, or use -DRLHOST_CUDA=OFF")
  endif()
endif()

if(RLHOST_WITH_CUDA)
  # The engine's kernels (runtime/nn/cuda/*.cu) are CUDA C++: Ampere (sm_80) and
  # Hopper (sm_90, with its PTX for newer GPUs) unless -DCMAKE_CUDA_ARCHITECTURES says otherwise.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
  endif()
  enable_language(CUDA)
  # NCCL and the CUDA runtime must be the ones LibTorch was built against: a pip
  # wheel ships them under site-packages/nvidia/, and an older system NCCL lacks
  # symbols libtorch_cuda needs. Prefer the wheel's, then the toolkit's.
  get_filename_component(_wheel_nvidia "${RLHOST_TORCH_ROOT}/../nvidia" ABSOLUTE)
  find_library(RLHOST_NCCL_LIBRARY NAMES nccl libnccl.so.2
               PATHS "${_wheel_nvidia}/nccl/lib" NO_DEFAULT_PATH)
  find_library(RLHOST_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(RLHOST_NCCL_INCLUDE_DIR nccl.h PATHS "${_wheel_nvidia}/nccl/include" NO_DEFAULT_PATH)
  find_path(RLHOST_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(RLHOST_CUDART_LIBRARY NAMES libcudart.so.13 libcudart.so.12
               PATHS "${_wheel_nvidia}/cu13/lib" "${_wheel_nvidia}/cuda_runtime/lib" NO_DEFAULT_PATH)
  if(NOT RLHOST_CUDART_LIBRARY)
    set(RLHOST_CUDART_LIBRARY CUDA::cudart)
  endif()
  if(NOT RLHOST_NCCL_LIBRARY OR NOT RLHOST_NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "rlhost: CUDA is on but NCCL was not found. Hint: install libnccl-dev or the nvidia-nccl wheel, or -DRLHOST_CUDA=OFF")
  endif()
  target_link_libraries(rlhost::torch INTERFACE
    "${RLHOST_TORCH_LIB_DIR}/libtorch_cuda.so" "${RLHOST_TORCH_LIB_DIR}/libc10_cuda.so"
    "${RLHOST_CUDART_LIBRARY}" "${RLHOST_NCCL_LIBRARY}")
  # Only the files with CUDA paths (RLHOST_CUDA_SOURCES in CMakeLists.txt) see these:
  # every other file compiles exactly as in the CPU build, so ccache serves it from there.
  set(RLHOST_CUDA_DEFINITIONS RLHOST_WITH_CUDA=1 USE_C10D_NCCL=1)
  set(RLHOST_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS} "${RLHOST_NCCL_INCLUDE_DIR}")
  # Force libtorch_cuda to load even though no symbol of it is referenced directly,
  # so torch::cuda::is_available() sees the CUDA backend.
  target_link_options(rlhost::torch INTERFACE "LINKER:--no-as-needed")
endif()
message(STATUS "rlhost: CUDA/NCCL paths: ${RLHOST_WITH_CUDA} (RLHOST_CUDA=${RLHOST_CUDA}) ${RLHOST_NCCL_LIBRARY}")
