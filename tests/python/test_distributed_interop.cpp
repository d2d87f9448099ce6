// Interop with the real Python tensordict: distributed (see tests/python/peer.h).
// Cases are being written.
#include "pch.h"
