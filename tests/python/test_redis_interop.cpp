// Interop with the real Python tensordict: redis (see tests/python/peer.h).
// Cases are being written.
#include "pch.h"
