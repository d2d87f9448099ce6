// Interop with the real Python tensordict: memory-mapped directories.
#include "pch.h"
