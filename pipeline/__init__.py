"""rewardhouse's pipeline package.

NumPy asks the kernel for transparent huge pages for every array over 4 MB (`madvise`). Where the
kernel then gathers each huge page on the spot (THP `defrag` set to `madvise`, a common default),
a process whose arrays grow by gigabytes waits on memory compaction: on the 2-core machine of
docs/testing.md, keeping 1.6 GB of fresh arrays took 1.2-4.2 s with huge pages and 0.6-0.8 s
without, and the engine's 1M-image crowded candidate search took 34.8-37.9 s against 26.9-28.6 s.
So rewardhouse processes turn it off, unless NUMPY_MADVISE_HUGEPAGE is already set. NumPy reads
the variable once, when it is imported: hence here, before any module of the package imports it
(worker processes inherit it).
"""

import os

os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
