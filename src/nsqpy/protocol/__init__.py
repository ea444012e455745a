"""Sans-I/O NSQ protocol core: frames, commands, messages, names and errors. No sockets here."""
