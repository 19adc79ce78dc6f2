"""Operating-system helpers: atomic files, regular files, hosts, resident pages, threads, deadlines."""
