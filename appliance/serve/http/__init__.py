"""What goes over HTTP besides the bodies: `ApiError` and its JSON (`errors.py`), the Host, Origin and Content-Type
check (`origin.py`), one serialiser per response object (`responses.py`), and answers as streams (`streams.py`)."""
