"""The queueing engines behind one protocol (``base.QueueEngine``): the quota pool (``queueing/admission.py``),
Kueue (``queueing/kueue.py``) and none (``unmanaged.py``), what they share on the cluster (``door.py``), the
pure rulings before a job is queued (``ruling.py``), and which engine queues a job (``pick.py``)."""
