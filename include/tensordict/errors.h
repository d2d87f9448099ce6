#pragma once
/// @file errors.h
/// The exception hierarchy of tensordict. Every exception thrown by the library on
/// bad input derives from tensordict::Error; messages name the full key path and
/// what was found versus what was expected.
///
/// Policy: errors raised by LibTorch itself inside a leaf operation (for example
/// a dtype that an op does not support) are caught by the core and rethrown as the
/// tensordict error of the operation with the key path prepended; the original
/// c10::Error is kept as the nested exception (std::throw_with_nested).

#include <stdexcept>
#include <string>
#include <utility>

namespace tensordict {

/// Root of every error the library throws on bad input or failed I/O.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A key (or nested key path) is missing, or already present where it must not be.
class KeyError : public Error {
 public:
  using Error::Error;
};

/// An index is out of range or not of a supported form.
class IndexError : public Error {
 public:
  using Error::Error;
};

/// Shapes disagree: a leaf does not start with the batch size, batch sizes of
/// stacked or concatenated tensordicts differ, an in-place write changes a shape.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// An entry is not of the kind the operation needs (a tensor where a tensordict
/// was expected, a non-tensor where a tensor was expected, a wrong dtype).
class TypeError : public Error {
 public:
  using Error::Error;
};

/// A value is of the right kind but not acceptable (bad separator, bad option).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// The tensordict is locked and the operation would add, remove or replace storage.
class LockedError : public Error {
 public:
  using Error::Error;
};

/// A device rule is broken (a tensordict with a device receives an entry that
/// cannot be moved, mixed devices where one is required).
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A schema, a typed field or a storage name is wrong or not available.
class SchemaError : public Error {
 public:
  using Error::Error;
};

/// The operation is not available on this storage: a view of a tensordict
/// whose data lives in a file or on a server, an in-place memmap of it.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

/// A file or directory is corrupt, truncated, foreign or of an unknown format.
class FormatError : public Error {
 public:
  using Error::Error;
};

/// I/O or server failure of a storage backend.
///
/// A storage throws it (or a subclass) naming what it knows; when the error
/// leaves a storage call, the core prepends the operation and the full key
/// path, records the path in key_path(), and keeps the storage's original
/// exception as the nested one (std::rethrow_if_nested reaches it). The
/// dynamic type is kept, so a caller can catch ConnectionError or TimeoutError
/// and retry.
class StorageError : public Error {
 public:
  using Error::Error;
  StorageError(const std::string& message, std::string key_path)
      : Error(message), key_path_(std::move(key_path)) {}
  /// The full key path the core attached ("('next', 'obs')"), empty when the
  /// error did not pass through the core or concerns no key.
  const std::string& key_path() const noexcept { return key_path_; }

 private:
  std::string key_path_;
};

/// The storage's server or file cannot be reached: refused or dropped
/// connection, a server that went away. The operation may be retried (a
/// storage reconnects on its next call).
class ConnectionError : public StorageError {
 public:
  using StorageError::StorageError;
};

/// The stored data changed under this handle: another process replaced,
/// resized or removed a leaf between the handle's metadata and this call. The
/// call wrote nothing; the handle's metadata has been refreshed, so a retry
/// sees the new state.
class ConflictError : public StorageError {
 public:
  using StorageError::StorageError;
};

/// A storage call did not complete in the time allowed (a command or connect
/// timeout). Whether the write took effect is unknown; retrying an idempotent
/// row write is safe.
class TimeoutError : public StorageError {
 public:
  using StorageError::StorageError;
};

}  // namespace tensordict
