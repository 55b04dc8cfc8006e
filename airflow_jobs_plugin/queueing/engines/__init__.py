"""The queueing engines behind one protocol (``base.QueueEngine``): the quota pool (``pool.py``), Kueue
(``kueue.py``, over the Kueue rules of ``queueing/kueue.py``) and none (``unmanaged.py``); what they
share on the cluster (``door.py``); the pure rulings before a job is queued (``ruling.py``); and which
engine queues a job (``pick.py``)."""
