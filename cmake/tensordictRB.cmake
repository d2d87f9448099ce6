# tensordict::rb (-DTENSORDICT_WITH_RB=ON, the default): replay buffers over
# any tensordict storage (ReplayBuffer), their writers (RoundRobinWriter,
# TensorDictMaxValueWriter), samplers (uniform, without replacement,
# prioritized, slices of trajectories) and the segment trees
# behind prioritized sampling (SumTree, MinTree), and the cursor several
# processes share in a mapped file (MappedCursor). Needs nothing but LibTorch;
# the Redis cursor (RedisCursor) is part of tensordict::redis.
# Installed and exported as the package component `rb`
# (find_package(tensordict COMPONENTS rb)). See docs/replay_buffer_library.md.

tensordict_add_library_component(tensordict_rb rb
  src/rb/segment_tree.cpp
  src/rb/writer.cpp
  src/rb/max_value_writer.cpp
  src/rb/slice_sampler.cpp
  src/rb/sampler.cpp
  src/rb/replay_buffer.cpp
  src/rb/prefetcher.cpp
  src/rb/checkpoint.cpp
  src/rb/shared_cursor.cpp)
message(STATUS "tensordict: rb component (replay buffers)")
