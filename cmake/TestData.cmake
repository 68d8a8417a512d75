# The tests' and benchmarks' data (tests/data, sources and licenses in its README.md and
# SOURCE.md files), assembled at configure time into <build>/test-data: plain files are
# copied, each `X.tar.xz` (the large tokenizers and GSM8K travel compressed) is unpacked
# into its own folder as X. Re-runs when a file under tests/data changes; an archive is
# unpacked again only when it is newer than what it unpacked to.
set(RLHOST_TEST_DATA "${CMAKE_BINARY_DIR}/test-data")
set(_rlhost_data_src "${CMAKE_SOURCE_DIR}/tests/data")
file(GLOB_RECURSE _rlhost_data_files CONFIGURE_DEPENDS RELATIVE "${_rlhost_data_src}" "${_rlhost_data_src}/*")
foreach(f IN LISTS _rlhost_data_files)
  get_filename_component(dir "${f}" DIRECTORY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_rlhost_data_src}/${f}")
  if(f MATCHES "^(.*)\\.tar\\.xz$")
    set(out "${RLHOST_TEST_DATA}/${CMAKE_MATCH_1}")
    if(NOT EXISTS "${out}" OR "${_rlhost_data_src}/${f}" IS_NEWER_THAN "${out}")
      file(ARCHIVE_EXTRACT INPUT "${_rlhost_data_src}/${f}" DESTINATION "${RLHOST_TEST_DATA}/${dir}")
      if(NOT EXISTS "${out}")
        message(FATAL_ERROR "tests/data/${f} must hold one file named ${CMAKE_MATCH_1}")
      endif()
      file(TOUCH_NOCREATE "${out}")  # the archive keeps mtime 0: newer than the archive now
    endif()
  else()
    file(COPY "${_rlhost_data_src}/${f}" DESTINATION "${RLHOST_TEST_DATA}/${dir}")
  endif()
endforeach()
