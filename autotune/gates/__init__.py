"""What a trial must pass to count: gate outcomes, score and rank (score), the dominated rule that
lets a trial skip its gates, numerics classes. May import verdict, bench, models."""
