"""Plain English: the words that say how a request is put, not what it is about. A
search leaves them out (``search.query``); the names an edit touched leave them out
too (``tooluse.touched``: ``which`` after ``type`` in a comment is no name).

The standard library only: every hook's shim imports it.
"""

# Words that say how a request is put, not what it is about: English function words, the
# question words, and the politeness and filler of a prompt. A record matching only these
# is no match ("what is the capital of France and Spain" has three words to search for,
# not eight). Words that name work in a code base ("test", "fix", "error", "file") are
# not among them: BM25 weighs them by how common they are in the memory at hand.
STOP_WORDS = frozenset((
    "a", "about", "above", "actually", "after", "again", "against", "all", "almost", "also",
    "am", "an", "and", "any", "anybody", "anyone", "anything", "are", "aren", "as", "at",
    "basically", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "cannot", "could", "couldn", "d", "did", "didn", "do", "does", "doesn",
    "doing", "don", "done", "down", "during", "each", "either", "else", "ever", "every",
    "everyone", "everything", "few", "for", "from", "further", "give", "had", "hadn", "has",
    "hasn", "have", "haven", "having", "he", "her", "here", "hers", "herself", "him", "himself",
    "his", "how", "however", "i", "if", "in", "into", "is", "isn", "it", "its", "itself",
    "just", "kind", "know", "let", "like", "ll", "lot", "lots", "m", "many", "may", "maybe",
    "me", "might", "mine", "more", "most", "much", "must", "mustn", "my", "myself", "need",
    "no", "nor", "not", "nothing", "now", "of", "off", "often", "on", "once", "one", "only",
    "or", "other", "others", "our", "ours", "ourselves", "out", "over", "own", "perhaps",
    "please", "quite", "rather", "re", "really", "s", "same", "say", "see", "seem", "she",
    "should", "shouldn", "so", "some", "somebody", "someone", "something", "somewhat", "such",
    "sure", "t", "tell", "than", "thank", "thanks", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "thing", "things", "this", "those",
    "though", "through", "to", "too", "under", "until", "up", "upon", "us", "use", "used",
    "using", "ve", "very", "via", "want", "was", "wasn", "way", "we", "well", "were", "weren",
    "what", "whatever", "when", "where", "whether", "which", "while", "who", "whom", "whose",
    "why", "will", "with", "within", "without", "won", "work", "worked", "working", "works",
    "would", "wouldn", "yes", "yet", "you", "your", "yours", "yourself", "yourselves",
))
