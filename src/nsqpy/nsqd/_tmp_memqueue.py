"""TEMPORARY stand-in for the disk queue while it is being written; deleted when it lands."""
from collections import deque


class DummyQueue:
    depth = 0

    def put(self, data): pass
    def put_many(self, datas): pass
    def get(self): return None
    def get_many(self, limit): return []
    def sync(self): pass
    def tick(self, now): pass
    def empty(self): pass
    def close(self): pass
    def delete(self): pass


class DiskQueue(DummyQueue):
    def __init__(self, **kw):
        self.q = deque()

    @property
    def depth(self):
        return len(self.q)

    def put_many(self, datas): self.q.extend(datas)
    def put(self, data): self.q.append(data)

    def get_many(self, limit):
        q = self.q
        return [q.popleft() for _ in range(min(limit, len(q)))]

    def get(self):
        return self.q.popleft() if self.q else None

    def empty(self): self.q.clear()
    def delete(self): self.q.clear()
