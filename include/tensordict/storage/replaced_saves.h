#pragma once
/// @file storage/replaced_saves.h
/// Freeing the disk space of saves that a newer save replaced.
///
/// A save over an existing directory (memmap(), the replay buffer's dumps(),
/// ...) installs the new directory in one atomic step, then deletes every name
/// of the old one before it returns. Freeing the old files' pages and blocks,
/// most of the cost of a deletion, is left to a background thread of the
/// process (docs/storage.md, "Saving over a save"): until it is done, the disk
/// space of the replaced save is still in use. A memmap() that runs out of space
/// waits for it and tries once more; a process that exits frees it either way.

namespace tensordict {

/// Blocks until the disk space of every save this process replaced so far is
/// freed. Useful before measuring free space.
void wait_for_replaced_saves();

}  // namespace tensordict
