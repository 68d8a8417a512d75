// Declarations-only stand-in (see README.md): ProcessGroupGloo.hpp needs nothing from it.
#pragma once
