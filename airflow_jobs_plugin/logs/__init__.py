"""Container logs into the task log: which containers are followed and which read in turn,
how far each was printed, and the last lines read on the worker.
"""
