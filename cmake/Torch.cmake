# LibTorch, from -DCMAKE_PREFIX_PATH / -DTorch_DIR, or from the `torch` Python wheel.
#
# We do not call find_package(Torch) for the CPU build: the PyPI wheels are CUDA
# builds whose TorchConfig.cmake insists on a matching CUDA toolkit. Instead we
# import the two libraries a CPU build needs (libtorch_cpu, libc10) directly;
# with RLHOST_CUDA on we add libtorch_cuda and libc10_cuda.
#
# Defines the imported target rlhost::torch and sets RLHOST_TORCH_LIB_DIR,
# RLHOST_TORCH_VERSION and RLHOST_TORCH_HAS_CUDA.

set(_torch_roots "")
if(Torch_DIR)
  get_filename_component(_r "${Torch_DIR}/../../.." ABSOLUTE)  # share/cmake/Torch -> root
  list(APPEND _torch_roots "${_r}")
endif()
foreach(_p IN LISTS CMAKE_PREFIX_PATH)
  list(APPEND _torch_roots "${_p}" "${_p}/../..")  # a root, or its share/cmake
endforeach()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    # find_spec, not import: a wheel installed for LibTorch alone (bootstrap.sh leaves out
    # its GPU and Python requirements) does not import, and need not.
    COMMAND ${Python3_EXECUTABLE} -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('torch').origin))"
    OUTPUT_VARIABLE _wheel_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
    RESULT_VARIABLE _py_rc)
  if(_py_rc EQUAL 0 AND _wheel_root)
    list(APPEND _torch_roots "${_wheel_root}")
  endif()
endif()

set(RLHOST_TORCH_ROOT "")
foreach(_r IN LISTS _torch_roots)
  get_filename_component(_r "${_r}" ABSOLUTE)
  if(EXISTS "${_r}/include/ATen/ATen.h" AND EXISTS "${_r}/lib/libtorch_cpu.so")
    set(RLHOST_TORCH_ROOT "${_r}")
    break()
  endif()
endforeach()
if(NOT RLHOST_TORCH_ROOT)
  message(FATAL_ERROR
    "rlhost: LibTorch not found (looked in: ${_torch_roots}).\n"
    "Hint: pip install torch (scripts/bootstrap.sh does it), or pass -DCMAKE_PREFIX_PATH=/path/to/libtorch")
endif()

set(RLHOST_TORCH_LIB_DIR "${RLHOST_TORCH_ROOT}/lib")
# torch/version.h moved to torch/headeronly/version.h in newer releases.
set(RLHOST_TORCH_VERSION "")
foreach(_vh "${RLHOST_TORCH_ROOT}/include/torch/headeronly/version.h"
            "${RLHOST_TORCH_ROOT}/include/torch/csrc/api/include/torch/version.h")
  if(EXISTS "${_vh}" AND NOT RLHOST_TORCH_VERSION)
    file(STRINGS "${_vh}" _vl REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) [0-9]+")
    set(_parts "")
    foreach(_k MAJOR MINOR PATCH)
      foreach(_l IN LISTS _vl)
        if(_l MATCHES "TORCH_VERSION_${_k} ([0-9]+)")
          list(APPEND _parts "${CMAKE_MATCH_1}")
        endif()
      endforeach()
    endforeach()
    list(LENGTH _parts _n)
    if(_n EQUAL 3)
      list(JOIN _parts "." RLHOST_TORCH_VERSION)
    endif()
  endif()
endforeach()
if(RLHOST_TORCH_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "rlhost: LibTorch ${RLHOST_TORCH_VERSION} at ${RLHOST_TORCH_ROOT} is too old; need >= 2.4")
endif()
if(EXISTS "${RLHOST_TORCH_LIB_DIR}/libtorch_cuda.so")
  set(RLHOST_TORCH_HAS_CUDA ON)
else()
  set(RLHOST_TORCH_HAS_CUDA OFF)
endif()
message(STATUS "rlhost: LibTorch ${RLHOST_TORCH_VERSION} at ${RLHOST_TORCH_ROOT} (CUDA libraries: ${RLHOST_TORCH_HAS_CUDA})")

add_library(rlhost::torch INTERFACE IMPORTED GLOBAL)
target_include_directories(rlhost::torch SYSTEM INTERFACE
  "${RLHOST_TORCH_ROOT}/include" "${RLHOST_TORCH_ROOT}/include/torch/csrc/api/include")
# Wheels since 2.x use the C++11 ABI, as does everything else we link.
target_compile_definitions(rlhost::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_link_libraries(rlhost::torch INTERFACE
  "${RLHOST_TORCH_LIB_DIR}/libtorch_cpu.so" "${RLHOST_TORCH_LIB_DIR}/libc10.so")
# at::parallel_for is a header template: with LibTorch's OpenMP backend it only
# forks when the caller is itself compiled with OpenMP (_OPENMP defined); without
# -fopenmp every parallel_for in our own kernels (the batch-invariant GEMMs,
# attention, sampling) runs on the calling thread alone, whatever at::set_num_threads
# says. The OpenMP runtime is LibTorch's own libgomp where the wheel bundles one, so
# the process has one thread pool.
file(STRINGS "${RLHOST_TORCH_ROOT}/include/ATen/Config.h" _at_omp REGEX "#define AT_PARALLEL_OPENMP 1")
if(_at_omp)
  target_compile_options(rlhost::torch INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-fopenmp>")
  file(GLOB _torch_gomp "${RLHOST_TORCH_LIB_DIR}/libgomp*.so*")
  if(_torch_gomp)
    list(GET _torch_gomp 0 _torch_gomp)
    target_link_libraries(rlhost::torch INTERFACE "${_torch_gomp}")
  else()
    target_link_options(rlhost::torch INTERFACE "$<$<LINK_LANGUAGE:CXX>:-fopenmp>")
  endif()
  message(STATUS "rlhost: LibTorch parallel backend OpenMP: our kernels built with -fopenmp (runtime ${_torch_gomp})")
endif()
# libtorch_cpu of a CUDA wheel needs libcudart from the nvidia wheels; its own
# RPATH finds them at run time, and -rpath-link lets the linker find them too.
target_link_options(rlhost::torch INTERFACE
  "LINKER:-rpath,${RLHOST_TORCH_LIB_DIR}"
  "LINKER:-rpath-link,${RLHOST_TORCH_LIB_DIR}")
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${RLHOST_TORCH_ROOT}/../nvidia/*/lib")
foreach(_d IN LISTS _nvidia_lib_dirs)
  get_filename_component(_abs "${_d}" ABSOLUTE)
  target_link_options(rlhost::torch INTERFACE "LINKER:-rpath-link,${_abs}")
endforeach()
