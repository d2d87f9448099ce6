// Built only into fuzzing builds with GCC (TENSORDICT_BUILD_FUZZERS): GCC's
// -fsanitize-coverage=trace-pc,trace-cmp calls __sanitizer_cov_trace_pc,
// which libFuzzer's runtime defines for the fuzz targets but nothing defines
// for the other programs of that build (the sanitizer tests), and the
// floating-point compare hooks, which neither libFuzzer nor libasan define.
// These weak no-ops serve them; libFuzzer's strong definitions win where
// they exist.
extern "C" {
__attribute__((weak, no_sanitize_coverage)) void __sanitizer_cov_trace_pc() {}
__attribute__((weak, no_sanitize_coverage)) void __sanitizer_cov_trace_cmpf(float, float) {}
__attribute__((weak, no_sanitize_coverage)) void __sanitizer_cov_trace_cmpd(double, double) {}
}
