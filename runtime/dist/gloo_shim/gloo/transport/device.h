// Declarations-only stand-in (see README.md): held through pointers only.
#pragma once

namespace gloo::transport {
class Device;
class UnboundBuffer;
}  // namespace gloo::transport
