# Apache Arrow's Parquet C++ library, from the `pyarrow` Python wheel (as LibTorch comes
# from the `torch` wheel; scripts/bootstrap.sh installs both), or from a root given as
# -DRLHOST_ARROW_ROOT=dir (holding include/arrow and lib/libarrow.so*).
#
# Optional: without it rlhost builds as before, and rl.data says, when asked to read a
# .parquet file, that this build has no Parquet reader. RLHOST_PARQUET=OFF skips the search.
#
# Defines the imported target rlhost::arrow and sets RLHOST_ARROW_FOUND, RLHOST_ARROW_VERSION.

option(RLHOST_PARQUET "Build the Parquet reader (needs Apache Arrow C++, e.g. from the pyarrow wheel)" ON)
set(RLHOST_ARROW_FOUND OFF)
if(NOT RLHOST_PARQUET)
  message(STATUS "rlhost: Parquet reader off (RLHOST_PARQUET=OFF): rl.data reads .jsonl and .json only")
  return()
endif()

set(_arrow_inc "")
set(_arrow_lib "")
if(RLHOST_ARROW_ROOT)
  set(_arrow_inc "${RLHOST_ARROW_ROOT}/include")
  set(_arrow_lib "${RLHOST_ARROW_ROOT}/lib")
else()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import pyarrow; print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0])"
      OUTPUT_VARIABLE _pa_out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _pa_rc)
    if(_pa_rc EQUAL 0)
      string(REPLACE "\n" ";" _pa_out "${_pa_out}")
      list(GET _pa_out 0 _arrow_inc)
      list(GET _pa_out 1 _arrow_lib)
    endif()
  endif()
endif()

# The wheel ships only versioned libraries (libarrow.so.2600): link those files.
set(_arrow_so "")
set(_parquet_so "")
if(_arrow_inc AND EXISTS "${_arrow_inc}/parquet/arrow/reader.h" AND EXISTS "${_arrow_inc}/arrow/util/config.h")
  file(STRINGS "${_arrow_inc}/arrow/util/config.h" _v REGEX "#define ARROW_(VERSION_STRING|SO_VERSION) ")
  string(REGEX MATCH "VERSION_STRING \"([^\"]+)\"" _m "${_v}")
  set(RLHOST_ARROW_VERSION "${CMAKE_MATCH_1}")
  string(REGEX MATCH "SO_VERSION \"([^\"]+)\"" _m "${_v}")
  set(_so "${CMAKE_MATCH_1}")
  foreach(_name arrow parquet)
    foreach(_cand "${_arrow_lib}/lib${_name}.so.${_so}" "${_arrow_lib}/lib${_name}.so")
      if(EXISTS "${_cand}" AND NOT _${_name}_so)
        set(_${_name}_so "${_cand}")
      endif()
    endforeach()
  endforeach()
endif()

if(NOT _arrow_so OR NOT _parquet_so)
  message(WARNING "rlhost: Apache Arrow/Parquet C++ not found (looked for the pyarrow wheel's headers and "
    "libraries: include '${_arrow_inc}', lib '${_arrow_lib}'). Building without the Parquet reader: rl.data "
    "will refuse .parquet files. Hint: run scripts/bootstrap.sh (it installs pyarrow), then reconfigure.")
  return()
endif()

# The wheel is built with the C++11 string ABI, as is everything rlhost links: a test link
# of one std::string-taking Parquet function proves it (a mismatch leaves it undefined).
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES "${_arrow_inc}")
set(CMAKE_REQUIRED_DEFINITIONS -D_GLIBCXX_USE_CXX11_ABI=1)
set(CMAKE_REQUIRED_LIBRARIES "${_parquet_so}" "${_arrow_so}")
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
#include <parquet/arrow/reader.h>
int main() {
  parquet::arrow::FileReaderBuilder b;
  return b.OpenFile(std::string("x")).ok() ? 0 : 1;
}]] RLHOST_ARROW_LINKS)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_DEFINITIONS)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_QUIET)
if(NOT RLHOST_ARROW_LINKS)
  message(WARNING "rlhost: Arrow ${RLHOST_ARROW_VERSION} at ${_arrow_lib} does not link with this compiler "
    "(C++ ABI or compiler too old; see CMakeFiles/CMakeError.log). Building without the Parquet reader. "
    "Hint: scripts/bootstrap.sh pins the tested pyarrow; or pass -DRLHOST_ARROW_ROOT=<an Arrow C++ install>.")
  return()
endif()

set(RLHOST_ARROW_FOUND ON)
message(STATUS "rlhost: Apache Arrow/Parquet ${RLHOST_ARROW_VERSION} at ${_arrow_lib}: Parquet reader on")
add_library(rlhost::arrow INTERFACE IMPORTED GLOBAL)
target_include_directories(rlhost::arrow SYSTEM INTERFACE "${_arrow_inc}")
target_compile_definitions(rlhost::arrow INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_link_libraries(rlhost::arrow INTERFACE "${_parquet_so}" "${_arrow_so}")
# The libraries stay where the wheel keeps them: the module finds them through its RPATH.
target_link_options(rlhost::arrow INTERFACE "LINKER:-rpath,${_arrow_lib}")
