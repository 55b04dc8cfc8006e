"""Who runs next: the admission step, the GPU quota pool (``quota``), Kueue as the engine
where a cluster runs it, the queue clock and who a DAG may charge.
"""
