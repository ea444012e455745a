"""A small real cluster for the /metrics tests: nsqlookupd, two nsqd registered with it, and an
nsqadmin reading it through the lookupd, all subprocesses on free loopback ports."""

from __future__ import annotations

from pathlib import Path

from .servers import VENV_BIN, Nsqd, Nsqlookupd, ServerProcess, free_port


class NsqAdmin(ServerProcess):
    def __init__(self, directory: Path, *extra: str) -> None:
        self.http_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__([str(VENV_BIN / "nsqadmin"), f"--http-address=127.0.0.1:{self.http_port}",
                          *extra], f"http://127.0.0.1:{self.http_port}/ping",
                         directory / "nsqadmin.log")

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


class Cluster:
    def __init__(self, tmp: Path, *extra: str, nsqd_flags: tuple[str, ...] = ()) -> None:
        self.started: list[ServerProcess] = []
        try:
            self.lookupd = Nsqlookupd(tmp / "lookupd", *extra)
            self.started.append(self.lookupd)
            self.nodes = []
            for i in range(2):
                node = Nsqd(tmp / f"nsqd{i}", f"--lookupd-tcp-address={self.lookupd.tcp_address}",
                            *extra, *nsqd_flags)
                self.nodes.append(node)
                self.started.append(node)
            self.admin = NsqAdmin(tmp / "admin",
                                  f"--lookupd-http-address={self.lookupd.http_address}", *extra)
            self.started.append(self.admin)
        except BaseException:
            self.stop()
            raise

    @property
    def daemons(self) -> list[ServerProcess]:
        return [self.nodes[0], self.nodes[1], self.lookupd, self.admin]

    def stop(self) -> None:
        for proc in reversed(self.started):
            proc.stop()
