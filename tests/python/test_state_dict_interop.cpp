// Interop with the real Python tensordict: state_dict (see tests/python/peer.h).
// Cases are being written.
#include "pch.h"
