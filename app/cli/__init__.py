"""The command line: Triton's `tritonserver` flags and one flag per setting of ours."""
