"""HTTP: parse -> service -> wire JSON; nothing else lives here."""
