"""Benchmarks of OpenEngine profiles: `make bench` runs them all and writes bench/results.md."""
