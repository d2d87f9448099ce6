// GCC fuzzing builds: libFuzzer's runtime aborts when GCC's trace-pc hook is
// called ("no longer supported"); this definition, linked first (with
// --allow-multiple-definition), makes the hook a no-op. The targets then get
// their feedback from the trace-cmp hooks (-use_value_profile=1), which
// libFuzzer implements: weaker than clang's edge coverage, which LibTorch
// 1.13's headers do not let us use (they do not compile with clang 14 in C++20).
extern "C" __attribute__((no_sanitize_coverage)) void __sanitizer_cov_trace_pc() {}
