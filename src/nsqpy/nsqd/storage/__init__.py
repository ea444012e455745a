"""nsqd's storage room: what the disk queue and the history have in common, below both.

``files.py`` writes and cuts segment files (vectored writes that finish or leave nothing, a torn
tail cut in place, directory fsyncs); ``commit.py`` is the group commit every fsync-before-answer
write goes through (one writer thread, one ``pwritev`` and one ``fdatasync`` per file per batch);
``background.py`` has the thread for the fsyncs no answer waits for, and makes files ahead of their
use.
It imports nothing of nsqd: the core (``diskqueue.py``) and the history stand on it.
"""
