"""linrnn-bench harness: training, the studies, the results store, reports and the command line.

Importing it changes nothing in the process: the process settings that speed and memory depend
on (one OpenBLAS thread, glibc's malloc keeping freed blocks) are applied by the programs the
project runs, the command line, its worker processes and the tests, through
`harness.process_settings.apply`, and recorded with every run.
"""
