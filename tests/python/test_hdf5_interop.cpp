// Interop with the real Python tensordict: hdf5 (see tests/python/peer.h).
// Cases are being written.
#include "pch.h"
