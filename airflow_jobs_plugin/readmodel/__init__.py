"""What the GPU Jobs pages, the JSON API and the CLI show: the job index, the views built from
it, listing, nodes and text, with ``inspect`` as their I/O.
"""
