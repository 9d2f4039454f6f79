"""What the operator knows and who may change it: the one owner thread (`owner`), the records it
keeps of runs, boards, leases and seats (`records`), the thread pools every other part works on
(`pools`), the garbage collector kept out of its rounds (`collector`), and the lab's Prometheus
metrics (`metrics`).
"""
