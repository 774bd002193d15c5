"""The run kernel every study uses: the session (``lifecycle``), the publisher
(``publisher``) and the Study contract with its one runner (``study``)."""
