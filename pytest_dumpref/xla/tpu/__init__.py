"""The TPU's room: what holds for modules the TPU compiler (libtpu) made and for nothing else.

``counting``: bytes as the TPU's cost analysis counts them (tiled layouts, memory spaces), and
each kernel's HBM and VMEM bytes apart.  The backend-neutral code in ``pytest_dumpref.xla``
finds this room by the backend's name in ``naming.BACKENDS``.
"""
