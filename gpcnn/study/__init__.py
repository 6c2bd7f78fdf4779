"""The convergence study: its CNNs and optimizers, the runs, the report and the figures. Only the
command line imports it; the library below never does."""
