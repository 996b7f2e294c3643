"""The offline demo: the daemon, the real Codex CLI, the scripted model server and the console chat."""
