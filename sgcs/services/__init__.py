"""Services built on sgcs's public API: transaction-coded handles, message queues, mailboxes for migrating instances."""
