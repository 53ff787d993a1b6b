"""Task sources: synthetic regression families, episodic image sampling, streams."""

#: Marks this package as mesabench's, so a shadowing ``datasets`` distribution is detected.
__mesabench__ = True
