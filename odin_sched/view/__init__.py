"""``pregel view``: a browser viewer for trained Gaussians and a live dashboard of training runs.

``model`` turns a PLY or trained scene into the binary buffers the page draws, ``status`` is the
small status file the trainers write for the dashboard, ``server`` serves both pages (HTML and
JavaScript from ``static/``, shipped in the package: nothing is fetched from the network).
"""
