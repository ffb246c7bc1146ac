// The sanitizer/fuzz build (ZAYA_FUZZ_COVERAGE) compiles zaya_lib with -fsanitize-coverage=trace-pc: every
// basic block calls __sanitizer_cov_trace_pc(). The fuzz driver (fuzz_driver.cpp) defines it to record
// coverage; every other binary that links zaya_lib (tests, zaya) gets this weak no-op. This file is built
// without the instrumentation (it would call itself).
extern "C" __attribute__((weak)) void __sanitizer_cov_trace_pc() {}
