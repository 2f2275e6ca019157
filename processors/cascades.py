"""OpenCV Haar cascades, one instance per thread.

``cv2.CascadeClassifier`` is not documented as thread-safe, and per-item post-processing runs on
a thread pool (:func:`processors.base.map_in_threads`), so each thread loads its own copy (a few
MB, parsed once per thread and file) instead of serialising detections behind a lock.
"""

from __future__ import annotations

import threading

import cv2

from processors.errors import ModelError

_LOCAL = threading.local()


def cascade(file: str) -> cv2.CascadeClassifier:
    """This thread's classifier for ``file``, one of OpenCV's bundled cascades
    (``cv2.data.haarcascades``, e.g. ``haarcascade_frontalface_default.xml``).

    Raises:
        ModelError: the file is missing from the installed OpenCV (OpenCV 5 ships no cascades;
            cardstream needs ``opencv-python-headless<5``).
    """
    loaded: dict[str, cv2.CascadeClassifier] = _LOCAL.__dict__.setdefault("cascades", {})
    c = loaded.get(file)
    if c is None:
        path = cv2.data.haarcascades + file  # type: ignore[attr-defined]
        c = cv2.CascadeClassifier(path)
        if c.empty():
            raise ModelError(f"OpenCV Haar cascade {file} not found at {path}; "
                             "cardstream needs opencv-python-headless<5")
        loaded[file] = c
    return c
