"""Mirror throughput benchmarks (`make bench`); never part of the test suite."""
