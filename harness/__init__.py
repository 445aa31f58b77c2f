"""linrnn-bench harness: training, the four studies, the results store, reports and the command line."""
