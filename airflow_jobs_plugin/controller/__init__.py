"""The admission controller: the one process that admits queued jobs, and its leader election."""
