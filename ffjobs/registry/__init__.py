"""The model-registry review: a run's model registered as the ``challenger`` with its model
card, reviewers approving it to ``champion`` (or rejecting it), and ``ffjobs swap`` to try one."""
