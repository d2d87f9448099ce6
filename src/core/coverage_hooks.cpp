// Built only into fuzzing builds with GCC (TENSORDICT_BUILD_FUZZERS): GCC's
// -fsanitize-coverage=trace-pc calls __sanitizer_cov_trace_pc, which
// libFuzzer's runtime defines for the fuzz targets but nothing defines for
// the other programs of that build (the sanitizer tests). This weak no-op
// serves them; libFuzzer's strong definition wins in the fuzz targets.
extern "C" __attribute__((weak, no_sanitize_coverage)) void __sanitizer_cov_trace_pc() {}
