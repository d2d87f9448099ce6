// Interop with the real Python tensordict: consolidated (see tests/python/peer.h).
// Cases are being written.
#include "pch.h"
