# Protocol Buffers (Debian's libprotobuf-dev and protobuf-compiler; scripts/bootstrap.sh
# installs both) for the Tinker API's wire codec: proto/tinker_public.proto, compiled by
# protoc at build time into the static library rlhost_tinker_wire.
#
# Optional, as Arrow is: without it rlhost builds as before and rl.tinker_wire says, when
# first used, that this build has no Tinker wire codec. Only the Tinker server needs it,
# and only a process that serves Tinker loads libprotobuf (the module is loaded on first
# use). RLHOST_TINKER=OFF skips the search.
#
# Sets RLHOST_PROTOBUF_FOUND; defines protobuf::libprotobuf and protobuf::protoc.

option(RLHOST_TINKER "Build the Tinker API wire codec (needs libprotobuf-dev and protobuf-compiler)" ON)
set(RLHOST_PROTOBUF_FOUND OFF)
if(NOT RLHOST_TINKER)
  message(STATUS "rlhost: Tinker wire codec off (RLHOST_TINKER=OFF)")
  return()
endif()

find_package(Protobuf QUIET)
if(NOT Protobuf_FOUND OR NOT TARGET protobuf::libprotobuf OR NOT Protobuf_PROTOC_EXECUTABLE)
  message(WARNING "rlhost: Protocol Buffers not found (need the C++ library and headers, and protoc). "
    "Building without the Tinker wire codec: rl.tinker_wire (the Tinker API server's protobuf bodies) "
    "will refuse to load. Hint: run scripts/bootstrap.sh (it installs the Debian packages "
    "libprotobuf-dev and protobuf-compiler), then reconfigure.")
  return()
endif()

set(RLHOST_PROTOBUF_FOUND ON)
message(STATUS "rlhost: Protocol Buffers ${Protobuf_VERSION} (protoc ${Protobuf_PROTOC_EXECUTABLE}): Tinker wire codec on")
