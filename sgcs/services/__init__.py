"""Services built on sgcs's public API only: transaction-coded handles, queues, flows, mailboxes."""
