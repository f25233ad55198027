"""Speed: the hardware's resolved defaults, compiling the networks, throughput and MFU, profiling, and the speed
promises a task can break."""
